# TEST DOUBLE (tierkv tests), not vLLM (package marker).
