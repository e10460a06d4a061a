"""Tests for the cluster component: pairing crypto and the CPace PAKE."""
