from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        from apps.core.stored_text import stored_vocabulary
        from apps.jobs.models import JobState

        stored_vocabulary(JobState)  # job states inside stored event texts are shown translated
