"""The reference driving stack: perception, fusion, prediction and planning graphs on rt_runtime."""
