"""The cluster connection form (pages): fields of the Cluster row plus an uploaded kubeconfig."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.clusters.connect import KUBECONFIG_MAX_BYTES
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
        if upload and upload.size > KUBECONFIG_MAX_BYTES:
            raise forms.ValidationError(
                _("A kubeconfig is at most %(n)d KiB.") % {"n": KUBECONFIG_MAX_BYTES // 1024}
            )
        return upload

    def _post_clean(self):
        # An upload stands in for the path: the model's "path or in-cluster" rule is checked by the service.
        if self.cleaned_data.get("kubeconfig_upload"):
            self.instance.kubeconfig_path = self.instance.kubeconfig_path or "(upload)"
        super()._post_clean()
