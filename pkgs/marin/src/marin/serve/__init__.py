"""``marin serve``: a model behind the OpenAI API (``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``, streaming), concurrent requests batched continuously by one decoder
thread (:mod:`marin.serve.engine_loop`); the routes are :mod:`marin.serve.app`, the request bodies
and the error shape :mod:`marin.serve.api`."""
