"""The query pipeline: bind, rewrite shared subplans, optimize, plan physically, execute; one function each."""
