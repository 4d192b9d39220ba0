"""The hardware: accelerators, links, networks, nodes and clusters, and the catalog that describes
them."""
