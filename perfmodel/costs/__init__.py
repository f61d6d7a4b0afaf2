"""Op cost rules (FLOPs, bytes per memory level, launches, DMAs, barriers) and fusion."""

from perfmodel.costs.rules import COST_RULES, CostContext, OpCost, cost_rule, op_cost

__all__ = ["COST_RULES", "CostContext", "OpCost", "cost_rule", "op_cost"]
