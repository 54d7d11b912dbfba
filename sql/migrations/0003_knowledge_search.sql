-- Knowledge search: per-account term statistics (rare terms choose the candidates a question is
-- ranked against, so a retrieval never ranks every row sharing a common word) and a vocabulary
-- of security/compliance synonyms that expands questions.

-- How many of an account's entries contain each lexeme (document frequency).
CREATE TABLE knowledge_terms (
    account_id text NOT NULL REFERENCES accounts ON DELETE CASCADE,
    lexeme     text NOT NULL,
    df         integer NOT NULL,  -- a delete never arrives before its insert, so never < 0
    PRIMARY KEY (account_id, lexeme)
);

-- How many entries an account has (the N of inverse document frequency).
CREATE TABLE knowledge_stats (
    account_id text PRIMARY KEY REFERENCES accounts ON DELETE CASCADE,
    items      integer NOT NULL
);

-- Keep knowledge_terms and knowledge_stats in step with knowledge_items, one statement at a time
-- (transition tables: a bulk import costs one upsert per distinct lexeme, not one per row).
-- Sorted upserts keep concurrent imports from deadlocking on the same lexemes.
CREATE FUNCTION knowledge_terms_after_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO knowledge_terms AS t (account_id, lexeme, df)
        SELECT o.account_id, l.lexeme, -count(*)
          FROM old_rows o, unnest(tsvector_to_array(o.search_vector)) AS l(lexeme)
         GROUP BY o.account_id, l.lexeme
         ORDER BY o.account_id, l.lexeme
        ON CONFLICT (account_id, lexeme) DO UPDATE SET df = greatest(t.df + excluded.df, 0);
        INSERT INTO knowledge_stats AS s (account_id, items)
        SELECT o.account_id, -count(*) FROM old_rows o GROUP BY o.account_id ORDER BY o.account_id
        ON CONFLICT (account_id) DO UPDATE SET items = greatest(s.items + excluded.items, 0);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO knowledge_terms AS t (account_id, lexeme, df)
        SELECT n.account_id, l.lexeme, count(*)
          FROM new_rows n, unnest(tsvector_to_array(n.search_vector)) AS l(lexeme)
         GROUP BY n.account_id, l.lexeme
         ORDER BY n.account_id, l.lexeme
        ON CONFLICT (account_id, lexeme) DO UPDATE SET df = t.df + excluded.df;
        INSERT INTO knowledge_stats AS s (account_id, items)
        SELECT n.account_id, count(*) FROM new_rows n GROUP BY n.account_id ORDER BY n.account_id
        ON CONFLICT (account_id) DO UPDATE SET items = s.items + excluded.items;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER knowledge_terms_insert AFTER INSERT ON knowledge_items
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_terms_after_change();
CREATE TRIGGER knowledge_terms_update AFTER UPDATE ON knowledge_items
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_terms_after_change();
CREATE TRIGGER knowledge_terms_delete AFTER DELETE ON knowledge_items
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_terms_after_change();

-- The vocabulary: phrases that mean the same thing in security and compliance questionnaires.
-- A question containing any phrase of a concept is also matched against every other phrase of it.
-- Data, not code: operators extend it with
--   INSERT INTO knowledge_vocabulary (concept, phrase) VALUES ('mfa', 'two-step verification');
-- (see docs/answer-quality.md); account_id NULL applies to every account, else to that one only.
CREATE TABLE knowledge_vocabulary (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id text REFERENCES accounts ON DELETE CASCADE,
    concept    text NOT NULL CHECK (btrim(concept) <> ''),
    phrase     text NOT NULL CHECK (btrim(phrase) <> ''),
    -- The phrase as a tsquery of adjacent lexemes; empty when it consists of stop words only.
    phrase_query tsquery GENERATED ALWAYS AS (phraseto_tsquery('english', phrase)) STORED
);
CREATE UNIQUE INDEX knowledge_vocabulary_phrase
    ON knowledge_vocabulary (coalesce(account_id, ''), concept, lower(phrase));

INSERT INTO knowledge_vocabulary (concept, phrase)
SELECT v.concept, p.phrase
  FROM (VALUES
    ('mfa', 'MFA|2FA|two-factor|two factor|multi-factor|multifactor|multi factor|second factor|one-time password|OTP'),
    ('sso', 'SSO|single sign-on|single sign on|SAML|federated identity|identity federation|identity provider|IdP|Shibboleth|InCommon|OpenID Connect|OIDC'),
    ('disaster_recovery', 'disaster recovery|disaster response|DR|DRP|recovery plan|failover|RTO|RPO|recovery time objective|recovery point objective'),
    ('business_continuity', 'business continuity|BC|BCP|BCM|continuity plan|operational resilience|resilience'),
    ('pen_test', 'penetration test|penetration testing|pen test|pentest|pen-test|ethical hacking|red team'),
    ('vuln_scan', 'vulnerability scan|vulnerability scanning|vulnerability assessment|vulnerability management|scanning'),
    ('encryption_at_rest', 'at rest|encrypted at rest|encryption at rest|stored data encryption|disk encryption|storage encryption'),
    ('encryption_in_transit', 'in transit|in-transit|in motion|TLS|SSL|HTTPS|transport layer security|transport encryption'),
    ('encryption', 'encryption|encrypt|encrypted|cryptography|cryptographic|cipher|AES'),
    ('key_management', 'key management|encryption keys|cryptographic keys|key rotation|KMS|HSM|hardware security module'),
    ('audit_log', 'audit log|audit logs|audit trail|logging|log|logs|event logging|log retention|SIEM|security information and event management'),
    ('incident_response', 'incident response|security incident|incident management|breach|data breach|breach notification|incident response plan'),
    ('access_control', 'access control|authorization|role-based access|RBAC|least privilege|privileged access|access rights|entitlements'),
    ('access_review', 'access review|user access review|access recertification|review access|entitlement review'),
    ('authentication', 'authentication|authenticate|login|log in|sign in|credentials|password|passwords'),
    ('patching', 'patch|patches|patching|patch management|security updates|critical patches'),
    ('change_management', 'change management|change control|change request|configuration management|change advisory board'),
    ('sdlc', 'SDLC|secure development|software development lifecycle|secure coding|code review|software testing|static analysis|dynamic analysis|SAST|DAST'),
    ('backup', 'backup|backups|back up|data backup|backed up|restore|restoration|snapshots'),
    ('data_center', 'data center|data centre|datacenter|hosting facility|colocation|physical security|AWS|cloud provider|IaaS'),
    ('third_party', 'third party|third-party|vendor|vendors|subprocessor|sub-processor|supplier|suppliers|supply chain|service provider'),
    ('risk_assessment', 'risk assessment|risk management|risk analysis|risk register|risk treatment'),
    ('policy', 'policy|policies|procedures|standards|documented|information security program|ISMS'),
    ('training', 'security awareness|awareness training|security training|training|phishing simulation'),
    ('background_check', 'background check|background checks|background screening|screening|pre-employment'),
    ('audit', 'audit|audits|assurance|SOC 2|SOC2|SOC 1|ISO 27001|ISO/IEC 27001|certification|attestation|independent audit|external audit|third-party audit'),
    ('privacy', 'privacy|personal data|personally identifiable information|PII|GDPR|FERPA|data protection|data subject'),
    ('data_retention', 'data retention|retention|retain|data deletion|data disposal|secure disposal|sanitization|data destruction|media sanitization'),
    ('data_classification', 'data classification|classify|classification|data inventory|data map|data flow'),
    ('network_security', 'firewall|firewalls|network segmentation|segmentation|IDS|IPS|intrusion detection|intrusion prevention|network security|DDoS'),
    ('malware', 'malware|anti-malware|antivirus|anti-virus|endpoint protection|EDR|endpoint detection'),
    ('mobile_device', 'mobile device|MDM|BYOD|endpoint management|UEM|unified endpoint management'),
    ('monitoring', 'monitoring|monitor|alerting|alerts|24x7|SOC|security operations center'),
    ('hipaa', 'HIPAA|PHI|protected health information|health information|BAA|business associate'),
    ('pci', 'PCI|PCI DSS|cardholder data|payment card'),
    ('accessibility', 'accessibility|VPAT|WCAG|section 508|ADA'),
    ('fips', 'FIPS|FIPS 140-2|FIPS 140-3|approved cryptographic|validated cryptographic module'),
    ('governance', 'governance|information security office|information security staff|security staff|security program|CISO|chief information security officer|security officer|security team|oversight'),
    ('remote_access', 'remote access|VPN|virtual private network|remote connection'),
    ('session', 'session timeout|session management|idle timeout|inactivity timeout|automatic logoff'),
    ('tenant_isolation', 'multi-tenant|multitenant|tenant isolation|segregation|logical separation|data segregation'),
    ('asset_inventory', 'asset inventory|asset management|hardware inventory|software inventory|CMDB'),
    ('sla', 'SLA|service level agreement|uptime|availability|service availability')
  ) AS v(concept, phrases),
  unnest(string_to_array(v.phrases, '|')) AS p(phrase);
