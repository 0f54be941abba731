"""Physical planning's parts, one module per operator family; optimizer/physical_planner.py dispatches to them."""
