"""Demo tenancy: departments, projects, users (seed 001 §5.1: algorithm team A, data analytics)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from apps.accounts import services
from apps.accounts.models import Department, Membership, Project

DEPARTMENTS = [
    ("algorithm", "算法部 Algorithm", "Model training and fine-tuning (seed 001: team A holds 40 %)."),
    ("data", "数据分析部 Data Analytics", "Batch analytics (seed 001: 20 %)."),
    ("platform", "平台部 Platform", "Online inference services."),
]
PROJECTS = [
    ("algorithm", "vision", "Vision 视觉", "vision"),
    ("algorithm", "llm-train", "LLM training 大模型训练", "llm-train"),
    ("data", "bi-analytics", "BI analytics 数据分析", "bi-analytics"),
    ("platform", "online-inference", "Online inference 在线推理", "online-inference"),
]
ADMIN = ("admin", "suanchi-admin")
DEMO_PASSWORD = "suanchi-demo"  # noqa: S105 - demo only, printed by load_demo
USERS = [
    ("alice", [("vision", "admin"), ("llm-train", "member")]),
    ("bob", [("llm-train", "member"), ("online-inference", "member")]),
    ("carol", [("bi-analytics", "viewer")]),
]


def load(*, actor, stdout) -> list[tuple[str, str, str]]:
    """Create what is missing; never reset an existing user's password. Returns printed credentials."""
    User = get_user_model()
    credentials = []
    for slug, name, description in DEPARTMENTS:
        if not Department.objects.filter(slug=slug).exists():
            services.department_create(name=name, slug=slug, description=description, actor=actor)
    for dept_slug, slug, name, namespace in PROJECTS:
        if not Project.objects.filter(slug=slug).exists():
            services.project_create(
                department=Department.objects.get(slug=dept_slug),
                name=name,
                slug=slug,
                namespace=namespace,
                actor=actor,
            )
    admin_name, admin_password = ADMIN
    admin = User.objects.filter(username=admin_name).first()
    if admin is None:
        User.objects.create_superuser(admin_name, f"{admin_name}@example.com", admin_password)
        credentials.append((admin_name, admin_password, "staff (platform admin)"))
    else:
        credentials.append((admin_name, "(unchanged)", "staff (platform admin)"))
    for username, memberships in USERS:
        user = User.objects.filter(username=username).first()
        if user is None:
            user = User.objects.create_user(username, f"{username}@example.com", DEMO_PASSWORD)
            password = DEMO_PASSWORD
        else:
            password = "(unchanged)"  # noqa: S105 - a label, not a password
        for project_slug, role in memberships:
            project = Project.objects.get(slug=project_slug)
            current = Membership.objects.filter(user=user, project=project).first()
            if current is None or current.role != role:
                services.membership_set(user=user, project=project, role=role, actor=actor)
        credentials.append((username, password, ", ".join(f"{p} ({r})" for p, r in memberships)))
    return credentials
