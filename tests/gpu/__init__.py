"""Tests of the optional GPU paths (SGLang serving, slime training), run on CPU against fakes."""
