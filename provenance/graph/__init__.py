"""The graph: one FalkorDB graph per workspace, every Cypher statement, the rows they answer, and the views
built on them (facts, paths, the mirror, what a contained source still shows)."""
