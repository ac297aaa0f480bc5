# A minimal Django settings module for the test runner.
SECRET_KEY = "not-secret"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "calc"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
