"""The request body that adds a PDF chunk's page fields to an older chunk or parent index (asset versions 13 and 14:
``es_rag.elasticsearch.assets.added_fields_request``), written out once for the tests that expect it."""

from __future__ import annotations

from typing import Any

PAGE_FIELDS_UPDATE: dict[str, Any] = {
    "properties": {
        "page_start": {"type": "integer"},
        "page_end": {"type": "integer"},
        "page_label_start": {"type": "keyword"},
        "page_label_end": {"type": "keyword"},
    }
}
