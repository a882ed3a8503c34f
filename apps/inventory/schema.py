"""OpenAPI description of the node-agent token authentication (drf-spectacular authentication
extension: https://drf-spectacular.readthedocs.io/en/latest/customization.html#step-5-extensions)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class AgentTokenAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "apps.inventory.authentication.AgentTokenAuthentication"
    name = "agentTokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'Node-agent token: "Token sca_<key>" (or "Bearer sca_<key>"); posts node reports only.',
        }
