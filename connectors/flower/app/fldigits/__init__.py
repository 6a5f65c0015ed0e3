"""fldigits: the Flower app Suanli runs for federated training (issue 22).

Softmax regression on scikit-learn's ``load_digits``, split non-IID over the SuperNodes.
Runs only in the Flower venv (``suanli.deploy.flower``); it never imports ``suanli``.
"""
