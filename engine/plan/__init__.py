"""Plan data below the stages that make and run it: logical and physical nodes, expressions, types, estimates."""
