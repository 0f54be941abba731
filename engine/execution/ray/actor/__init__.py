"""Inside a Ray actor: the worker, the inboxes its fragments read, the partitions it keeps and their disk cache."""
