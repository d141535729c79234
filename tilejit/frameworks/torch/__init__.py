"""The torch wing: everything tilejit knows of torch (claims, lazy-view bits, the custom
op and its schema, autograd, Dynamo entry points), behind the runtime's framework adapter."""
