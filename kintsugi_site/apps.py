from django.apps import AppConfig


class KintsugiSiteConfig(AppConfig):
    name = "kintsugi_site"
    label = "kintsugi_site"

    def ready(self) -> None:
        from django.conf import settings
        from django.contrib.auth.signals import user_logged_in

        from core import db_deadline
        from kintsugi_site.session_touch import touched_at_login

        user_logged_in.connect(touched_at_login, dispatch_uid="kintsugi_session_touch")
        if settings.WEB_PROCESS:  # a frozen database must cost a request its deadline, not the freeze
            db_deadline.install(settings.KINTSUGI_WEB_STATEMENT_TIMEOUT_SECONDS)
