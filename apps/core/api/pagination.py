from rest_framework.pagination import PageNumberPagination

from apps.core.paginators import CappedCountPaginator, EstimatedCountPaginator


class StandardPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class EstimatedCountPagination(StandardPagination):
    """For the append-only ledgers (rollups, usage entries: millions of rows): an unfiltered list past
    ``apps.core.paginators.ESTIMATE_ABOVE`` rows answers with the planner's row estimate as ``count``
    and ``"count_estimated": true`` instead of a ``COUNT(*)`` of the whole table on every page (issue
    20); ``next`` comes from the rows themselves, so paging to the end still works. Filtered, the
    count is exact (``count_estimated`` false)."""

    django_paginator_class = EstimatedCountPaginator

    def get_paginated_response(self, data):
        response = super().get_paginated_response(data)
        response.data["count_estimated"] = self.page.paginator.estimated
        return response

    def get_paginated_response_schema(self, schema):
        schema = super().get_paginated_response_schema(schema)
        schema["properties"]["count_estimated"] = {"type": "boolean"}
        return schema


class CappedCountPagination(EstimatedCountPagination):
    """``EstimatedCountPagination`` whose filtered lists are counted up to ``ESTIMATE_ABOVE`` rows only
    (``apps.core.paginators.CappedCountPaginator``): the usage-entry ledger, whose model filter has no
    index (billing 0012)."""

    django_paginator_class = CappedCountPaginator
