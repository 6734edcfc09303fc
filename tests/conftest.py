# Every daemon the tests start, in this process or as a child process, checks the core invariants after each
# step of its ledger and its desk (io/daemon.py CHECK_ENV): the same functions as the stateful tests and the
# model checker, so a violation anywhere stops the run.
import os

from harness.io.daemon import CHECK_ENV

os.environ[CHECK_ENV] = "1"
