# Wraps a ```python,setup-nodes block: `nodes`, the URLs of three fresh redis-server nodes.
import os

nodes = os.environ["IRONLOCK_NODES"].split(",")
# EXAMPLE
