"""One connection's state: dispatch of a statement, transactions, plain-SQL routing, status messages."""
