"""The TF-free data model every layer shares: cost graph, devices and links, placements, graph orders.

Nothing here imports TensorFlow or any other part of tfplace (see ``docs/architecture.md``).
"""
