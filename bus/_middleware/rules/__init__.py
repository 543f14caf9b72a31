"""Declarative rule guards: YAML files of CEL conditions, evaluated in the kernel (docs/rules.md)."""
