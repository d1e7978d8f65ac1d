"""Recording: agents' actions, memory and effects written into the graph (in process, live, or by a remote
agent over the API), replayed for a repair, and read back for pages."""
