"""Logical rewrite rules, one per module; each module's one public function is named like the module."""
