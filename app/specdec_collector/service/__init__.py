"""The HTTP service: the app and its lifespan, dependencies, routes, auth, middleware, sampler."""
