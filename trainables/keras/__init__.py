"""framework: keras: Keras 3 on the jax, tensorflow or torch backend."""
