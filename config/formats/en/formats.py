"""Date formats of every page, the admin included: ISO digits in each language (Django format-file
syntax, https://docs.djangoproject.com/en/5.2/ref/templates/builtins/#date). apps/core/formatting.py
and the template filters in apps/core/templatetags/suanchi.py print through these."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i"
YEAR_MONTH_FORMAT = "Y-m"
MONTH_DAY_FORMAT = "m-d"
FIRST_DAY_OF_WEEK = 1
DECIMAL_SEPARATOR = "."
THOUSAND_SEPARATOR = ","
NUMBER_GROUPING = 3
