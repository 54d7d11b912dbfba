"""The web app's routes (added to service/web/app.py routes(), so the front door guards them)."""

from __future__ import annotations

from aiohttp import web

from . import account, accounts, ask, joining, kb_merge, knowledge, members, rfp_bulk, rfps, static


def routes() -> list[web.RouteDef]:
    get = web.get
    return [
        get("/", rfps.home, name="page_home", allow_head=False),
        get("/signin", account.get_sign_in, name="page_sign_in", allow_head=False),
        web.post("/signin", account.post_sign_in, name="page_sign_in_post"),
        web.post("/signout", account.post_sign_out, name="page_sign_out"),
        get("/accounts", accounts.accounts_page, name="page_accounts", allow_head=False),
        web.post("/accounts/switch", accounts.switch, name="page_switch_account"),
        get("/invitations/{token}", joining.invitation_page, name="page_invitation", allow_head=False),
        web.post("/invitations/{token}", joining.accept_invitation_page, name="page_accept_invitation"),
        get("/confirm", joining.confirm_page, name="page_confirm", allow_head=False),
        web.post("/confirm", joining.confirm, name="page_confirm_post"),
        get("/password/forgot", joining.forgot_page, name="page_password_forgot", allow_head=False),
        web.post("/password/forgot", joining.forgot, name="page_password_forgot_post"),
        get("/password/reset", joining.reset_page, name="page_password_reset", allow_head=False),
        web.post("/password/reset", joining.reset, name="page_password_reset_post"),
        get("/rfps", rfps.rfp_list, name="page_rfps", allow_head=False),
        web.post("/rfps", rfps.create, name="page_create_rfp"),
        get("/rfps/{id}", rfps.rfp_page, name="page_rfp", allow_head=False),
        get("/items", rfps.my_items, name="page_my_items", allow_head=False),
        web.post("/rfps/{id}/items/{item_id}", rfps.review, name="page_review_item"),
        get("/rfps/{id}/items/{item_id}/assign", rfps.choose_assignee, name="page_choose_assignee",
            allow_head=False),
        web.post("/rfps/{id}/items/{item_id}/assign", rfps.assign, name="page_assign_item"),
        web.post("/rfps/{id}/approve", rfp_bulk.approve, name="page_approve_items"),
        web.post("/rfps/{id}/import", rfps.upload, name="page_import_items"),
        get("/rfps/{id}/imports/{report_id}", rfps.import_report, name="page_import_report",
            allow_head=False),
        web.post("/rfps/{id}/answer", rfps.answer_all, name="page_answer_rfp"),
        get("/rfps/{id}/progress", rfps.progress, name="page_rfp_progress", allow_head=False),
        get("/rfps/{id}/export", rfps.export, name="page_export_rfp", allow_head=False),
        get("/kb", knowledge.kb_list, name="page_kb", allow_head=False),
        web.post("/kb", knowledge.kb_create, name="page_kb_create"),
        web.post("/kb/import", knowledge.kb_import, name="page_kb_import"),
        get("/kb/imports/{id}", knowledge.kb_import_report, name="page_kb_import_report", allow_head=False),
        get("/kb/care", knowledge.kb_care, name="page_kb_care", allow_head=False),
        get("/kb/care/merge", kb_merge.merge_page, name="page_kb_merge", allow_head=False),
        web.post("/kb/{id}/reviewed", knowledge.kb_reviewed, name="page_kb_reviewed"),
        get("/kb/{id}", knowledge.kb_entry, name="page_kb_entry", allow_head=False),
        web.post("/kb/{id}", knowledge.kb_update, name="page_kb_update"),
        web.post("/kb/{id}/delete", knowledge.kb_delete, name="page_kb_delete"),
        web.post("/kb/{id}/merge", kb_merge.merge, name="page_kb_merge_post"),
        get("/ask", ask.ask_form, name="page_ask", allow_head=False),
        web.post("/ask", ask.ask_page, name="page_ask_post"),
        get("/ask/{id}", ask.question_page, name="page_question", allow_head=False),
        get("/ask/{id}/state", ask.question_state, name="page_question_state", allow_head=False),
        get("/members", members.members_page, name="page_members", allow_head=False),
        web.post("/members/invite", members.invite_member, name="page_invite"),
        web.post("/members/invitations/{id}/revoke", members.revoke, name="page_revoke_invitation"),
        web.post("/members/{id}/role", members.change_member_role, name="page_change_role"),
        web.post("/members/{id}/remove", members.remove, name="page_remove_member"),
        get("/static/app/{name}", static.asset, name="page_asset", allow_head=False),
    ]
