"""High availability through ZooKeeper (kazoo): the state store, leader election as a lease,
durable dump requests and the candidate loop. Imported only when ``state.type: zookeeper`` is
configured; the core never imports it."""
