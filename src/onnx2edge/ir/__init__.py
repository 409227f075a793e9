"""The intermediate representation every pass and backend works on."""

from .graph import Attr, Graph, Node, TensorType, Value, name_factory

__all__ = ["Attr", "Graph", "Node", "TensorType", "Value", "name_factory"]
