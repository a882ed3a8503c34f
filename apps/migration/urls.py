"""Migration pages, mounted at /migration/ (namespace "migration")."""

app_name = "migration"

urlpatterns = []
