"""Integrations of emq with other frameworks, each in its own module or package, each
importable only with its extra installed (``pip install emq[django]`` for
:mod:`emq.contrib.django`). The core never imports them."""
