"""HTTP handlers, one module per resource; ``service.app`` mounts them."""
