"""In-memory adapters: fakes of every port, for tests of soong-agent and of agents built on it."""
