"""inductor-ext: ``torch.compile(model, backend="ext")``, an out-of-tree Inductor backend.

Importing is not needed to use the backend: it is registered through the
``torch_dynamo_backends`` entry point when the package is installed.
"""

__version__ = "0.1.0"
