from django.apps import AppConfig


class KintsugiSiteConfig(AppConfig):
    name = "kintsugi_site"
    label = "kintsugi_site"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from kintsugi_site.session_touch import touched_at_login

        user_logged_in.connect(touched_at_login, dispatch_uid="kintsugi_session_touch")
