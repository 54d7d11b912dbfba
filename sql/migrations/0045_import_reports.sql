-- The web app's import reports (the knowledge base's CSV import, an RFP's questionnaire upload).
-- The report was the upload's own response, so a browser's reload of it (or Back then Forward)
-- sent the upload again and imported the file a second time. Now the POST imports, keeps its
-- report here in the same transaction and answers 303 to the report's page (GET
-- /kb/imports/{id}, /rfps/{rfp}/imports/{id}): a reload reads the report again. Read only within
-- its account; housekeeping deletes a report a week old (service/domain/import_reports.py).
-- Forward-only: once landed, never edit this file; add a new numbered one.
CREATE TABLE import_reports (
    id          text PRIMARY KEY,
    account_id  text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    member_id   text REFERENCES members ON DELETE SET NULL,  -- who imported
    -- The RFP a questionnaire was uploaded into; null for the knowledge base's import.
    rfp_id      text REFERENCES rfps ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    report      jsonb NOT NULL
);
-- housekeeping's sweep by age; the foreign keys' own statements (removing a member, deleting an
-- RFP) find their rows without reading the table (as migration 0040 for the other tables).
CREATE INDEX import_reports_created ON import_reports (created_at);
CREATE INDEX import_reports_member ON import_reports (member_id) WHERE member_id IS NOT NULL;
CREATE INDEX import_reports_rfp ON import_reports (rfp_id) WHERE rfp_id IS NOT NULL;
COMMENT ON TABLE import_reports IS
    'The web app''s import reports, kept for their page (GET /kb/imports/{id}, /rfps/{rfp}/imports/{id}) so that a reload reads the report instead of importing again; deleted by housekeeping a week old.';
