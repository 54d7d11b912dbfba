"""The web app behind `web_link`: server-rendered pages on the same domain functions as the API.

Sign-in makes a server-side session (service/domain/sessions.py); `common.page` is each page's
access policy (the session's member, its role, CSRF on every POST) and renders failures as pages.
Templates are in templates/, the stylesheet and script in service/web/static/app/.
"""
