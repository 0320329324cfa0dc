"""Render Ollama prompt TEMPLATEs (Go ``text/template`` syntax) in pure Python.

The Modelfile editor previews the exact prompt a TEMPLATE produces for a sample conversation. This package is a
faithful subset of Go's text/template, written after Go's own ``text/template/parse`` (lexer, parser) and
``text/template/exec.go`` (evaluator), plus the data model and the ``Execute`` logic of Ollama's
``template/template.go``:

* :func:`render_go_template` renders any template against a data dict;
* :func:`render_ollama_prompt` builds the prompt Ollama would build for a chat request;
* :func:`template_variables` lists the top-level fields a template uses.

Value model (Python -> Go): ``None`` is nil; a ``dict`` is a ``map[string]any`` (printed, ranged and JSON-encoded
in sorted key order, as Go does); ``list``/``tuple`` are slices; ``str``/``int``/``float``/``bool`` are themselves;
any other object is a struct whose public attributes are its fields. An object with a ``go_string()`` method
prints through it (a ``fmt.Stringer``), one with ``go_json()`` encodes through it (a ``json.Marshaler``).

Modules: ``lexer``, ``nodes`` and ``parser`` turn a template into a tree; ``exec`` runs it; ``values``, ``gojson``
and ``strconv`` are Go's printing, JSON encoding and string handling; ``funcs`` holds the template functions;
``ollama_types`` and ``ollama`` are Ollama's data model and Execute; ``api`` is the generic entry points.
"""

from app.core.modelfile.go_template.api import render_go_template, template_variables
from app.core.modelfile.go_template.errors import TemplateError
from app.core.modelfile.go_template.ollama import render_ollama_prompt

__all__ = ["TemplateError", "render_go_template", "render_ollama_prompt", "template_variables"]
