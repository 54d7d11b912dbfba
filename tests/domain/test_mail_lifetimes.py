"""The e-mailed links' lifetimes in words. The password reset link lives one hour by default
(members.password_reset_ttl_hours = 1.0): its e-mail said "within 1 hours" to every user."""

from __future__ import annotations

from service.domain.members import confirmation_mail, password_reset_mail


def test_reset_mail__one_hour_is_singular_and_other_lifetimes_plural():
    _, body = password_reset_mail("https://rfp.example", "TOKEN", 1.0)
    assert "Open this link within 1 hour to choose a new password" in body and "1 hours" not in body
    _, body = password_reset_mail("https://rfp.example", "TOKEN", 2)
    assert "within 2 hours to choose" in body
    _, body = password_reset_mail("https://rfp.example", "TOKEN", 0.5)
    assert "within 0.5 hours to choose" in body


def test_confirmation_mail__one_hour_is_singular():
    _, body = confirmation_mail("https://rfp.example", "Acme", "TOKEN", 1.0)
    assert "\n1 hour, here (the link works once)" in body
    _, body = confirmation_mail("https://rfp.example", "Acme", "TOKEN", 48.0)
    assert "\n48 hours, here (the link works once)" in body
