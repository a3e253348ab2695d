"""Callback channels: the HTTP and Kafka dispatchers that implement ``poller.delivery.Dispatcher``,
the retry policy they share, and the private-address guard."""
