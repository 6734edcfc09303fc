# harness.io: the trio shell around the pure core; everything that touches files, sockets or terminals.
