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
        help_text=_(
            "Enough on its own: stored as a secret file on the server (mode 0600, in "
            "SUANCHI_SECRETS_DIR) whose path the cluster keeps. Inline credentials only "
            "(token, client-certificate-data, certificate-authority-data)."
        ),
        widget=forms.FileInput,  # no "accept": ~/.kube/config has no extension
    )

    # The upload first: it is the usual way in; a path is for a file already on the server.
    field_order = ["name", "slug", "backend", "kubeconfig_upload", "kubeconfig_path", "kube_context"]

    class Meta:
        model = Cluster
        fields = CONNECTION_FIELDS
        labels = {
            "name": _("Name"),
            "slug": _("Slug"),
            "backend": _("Backend"),
            "kubeconfig_path": _("Kubeconfig path on the server"),
            "kube_context": _("Context"),
            "in_cluster": _("Use the pod's service account (in-cluster)"),
            "description": _("Description"),
        }
        help_texts = {
            "slug": _(
                "Letters, digits and hyphens; used in addresses and in the stored kubeconfig's file name."
            ),
            "kubeconfig_path": _(
                "An absolute path inside SUANCHI_SECRETS_DIR. Leave empty when you upload a kubeconfig "
                "or use the in-cluster service account."
            ),
            "kube_context": _("Empty: the kubeconfig's current-context."),
            "in_cluster": _("When Suanchi itself runs in the cluster it manages."),
        }
        widgets = {
            "kubeconfig_path": forms.TextInput(attrs={"class": "mono", "autocomplete": "off"}),
            "description": forms.Textarea(attrs={"rows": 3}),
        }

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
