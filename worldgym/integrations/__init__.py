"""Bridges to other trainers' env interfaces (TRL's ``environment_factory``: :mod:`worldgym.integrations.trl`)."""
