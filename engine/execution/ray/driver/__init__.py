"""The Ray executor's driver side: the cluster, one execution's fragments, scans, routing and gather, what actors keep."""
