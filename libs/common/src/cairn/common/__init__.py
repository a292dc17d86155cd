"""Code shared by every Cairn component: routing, key order, errors."""
