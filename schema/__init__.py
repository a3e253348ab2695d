"""tickd's data layer: the CQL, the domain model, pure time math and the store both sides share."""
