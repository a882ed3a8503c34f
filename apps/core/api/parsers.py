"""The project's JSON parser (``DEFAULT_PARSER_CLASSES``): DRF's, refusing deep nesting first.

DRF's ``JSONParser`` hands the body straight to ``json.load``, which recurses per nesting level:
``[`` × 100 000 from any authenticated caller (agent tokens included) was a ``RecursionError`` 500.
This parser measures the depth iteratively (``apps.core.jsondepth``) and answers 400
"JSON nested deeper than 64 levels" before decoding (issue 15, finding 5a).
"""

from __future__ import annotations

import codecs
import json

from django.utils.translation import gettext as _
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json as drf_json

from apps.core.jsondepth import MAX_JSON_DEPTH, too_deep


class DepthLimitedJSONParser(JSONParser):
    max_depth = MAX_JSON_DEPTH

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = get_encoding(parser_context)  # refuses bytes-to-bytes codecs (bz2_codec, …)
        try:
            text = codecs.getreader(encoding)(stream).read()
        except UnicodeError as exc:
            raise ParseError(_("JSON parse error - %(error)s") % {"error": exc}) from exc
        if too_deep(text, self.max_depth):
            raise ParseError(_("JSON nested deeper than %(limit)d levels") % {"limit": self.max_depth})
        parse_constant = drf_json.strict_constant if self.strict else None
        try:
            return json.loads(text, parse_constant=parse_constant)
        except RecursionError as exc:  # belt and braces: a subclass with a higher max_depth
            raise ParseError(
                _("JSON nested deeper than %(limit)d levels") % {"limit": self.max_depth}
            ) from exc
        except ValueError as exc:
            raise ParseError(_("JSON parse error - %(error)s") % {"error": exc}) from exc
