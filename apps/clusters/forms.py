"""The cluster connection form (pages): fields of the Cluster row plus an uploaded kubeconfig."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.clusters.connect import kubeconfig_secret_path
from apps.clusters.kubeconfig_safety import KUBECONFIG_MAX_BYTES, kubeconfig_parse
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster

CONNECTION_FIELDS = (
    "name",
    "slug",
    "backend",
    "kubeconfig_path",
    "kube_context",
    "in_cluster",
    "description",
)


class ClusterConnectionForm(forms.ModelForm):
    kubeconfig_upload = forms.FileField(
        label=_("Upload a kubeconfig"),
        required=False,
        help_text=_("Stored as a secret file on the server (mode 0600); the cluster keeps its path."),
    )

    class Meta:
        model = Cluster
        fields = CONNECTION_FIELDS

    def clean_kubeconfig_upload(self):
        upload = self.cleaned_data.get("kubeconfig_upload")
        if upload:
            if upload.size > KUBECONFIG_MAX_BYTES:
                raise forms.ValidationError(
                    _("A kubeconfig is at most %(n)d KiB.") % {"n": KUBECONFIG_MAX_BYTES // 1024}
                )
            try:  # what it may contain, named on the field (the service checks it again, with the context)
                kubeconfig_parse(upload.read())
            except ValidationFailed as e:
                raise forms.ValidationError((e.details or {}).get("kubeconfig") or e.message) from e
            finally:
                upload.seek(0)
        return upload

    def _post_clean(self):
        # An upload stands in for the path: the secret file the service writes once the row is valid.
        if self.cleaned_data.get("kubeconfig_upload"):
            slug = self.cleaned_data.get("slug") or self.instance.slug or ""
            self.cleaned_data["kubeconfig_path"] = str(kubeconfig_secret_path(slug))
            self.instance.kubeconfig_upload_pending = True
        super()._post_clean()
