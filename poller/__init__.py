"""tickd poller nodes: membership, hash-ring ownership with fencing, per-second firing, callbacks."""
