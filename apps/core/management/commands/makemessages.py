"""makemessages that also extracts ``stored("…")`` (apps.core.stored_text): texts written to the
database and translated when someone reads them. Django documents overriding ``xgettext_options`` in a
subclass of the command for extra keywords."""

from django.core.management.commands import makemessages


class Command(makemessages.Command):
    xgettext_options = [*makemessages.Command.xgettext_options, "--keyword=stored"]
