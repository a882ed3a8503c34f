"""Writes for the device catalog, one module per topic: loading the built-in catalog and versioning compute
coefficients (``device_models``), compute templates (算力模板, ``templates``), the built-in templates kept in
step with the catalog (``builtin_templates``) and device request templates (``request_templates``).

Other apps and the tests import the names below from ``apps.catalog.services``.
"""

from apps.catalog.services.builtin_templates import (
    PROFILE_DESCRIPTION,
    SHARED_DESCRIPTION,
    SHARED_NAMES,
    WHOLE_DESCRIPTION,
    WHOLE_NAME,
    compute_template_sync_builtin,
)
from apps.catalog.services.device_models import (
    DEFAULT_CATALOG_PATH,
    SYNC_COEFFICIENT_EFFECTIVE_FROM,
    SYNC_COEFFICIENT_REASON,
    SYNCED_FIELDS,
    catalog_sync,
    compute_coefficient_check,
    compute_coefficient_set,
)
from apps.catalog.services.request_templates import (
    request_template_check,
    request_template_delete,
    request_template_document,
    request_template_export,
    request_template_import,
    request_template_resolve,
)
from apps.catalog.services.templates import (
    TEMPLATE_FIELDS,
    compute_template_build,
    compute_template_create,
    compute_template_delete,
    compute_template_retire,
    compute_template_update,
    mig_layout_check,
)

__all__ = [
    "DEFAULT_CATALOG_PATH",
    "PROFILE_DESCRIPTION",
    "SHARED_DESCRIPTION",
    "SHARED_NAMES",
    "SYNCED_FIELDS",
    "SYNC_COEFFICIENT_EFFECTIVE_FROM",
    "SYNC_COEFFICIENT_REASON",
    "TEMPLATE_FIELDS",
    "WHOLE_DESCRIPTION",
    "WHOLE_NAME",
    "catalog_sync",
    "compute_coefficient_check",
    "compute_coefficient_set",
    "compute_template_build",
    "compute_template_create",
    "compute_template_delete",
    "compute_template_retire",
    "compute_template_sync_builtin",
    "compute_template_update",
    "mig_layout_check",
    "request_template_check",
    "request_template_delete",
    "request_template_document",
    "request_template_export",
    "request_template_import",
    "request_template_resolve",
]
