-- Vocabulary review (docs/answer-quality.md, "Vocabulary review"): seeded phrases that do not mean
-- their concept once stemmed, or that are not synonyms of it, are removed. Only the seeded rows
-- (account_id NULL) are touched; an operator's own phrases stay.
--
-- * accessibility: 'accessibility' stems to the English lexeme 'access' (as do "accessible" and
--   "access"), so every question about access control expanded to VPAT/WCAG entries.
-- * monitoring: a bare 'SOC' is the audit report (SOC 2) far more often than a security
--   operations center; the spelled-out phrase stays.
DELETE FROM knowledge_vocabulary
 WHERE account_id IS NULL
   AND (concept, lower(phrase)) IN (('accessibility', 'accessibility'),
                                    ('monitoring', 'soc'));

-- New concepts and phrases, written from the common control domains of security questionnaires
-- (CSA CAIQ/CCM, EDUCAUSE HECVAT, SIG, ISO 27002 and NIST 800-53 families), not from any
-- evaluation set's wording.
INSERT INTO knowledge_vocabulary (concept, phrase)
SELECT v.concept, p.phrase
  FROM (VALUES
    ('secure_configuration', 'hardening|hardened|system hardening|baseline configuration|configuration baseline|secure configuration|CIS benchmark|CIS benchmarks|golden image'),
    ('high_availability', 'high availability|redundancy|redundant|geo-redundant|geographic redundancy|availability zone|availability zones|multi-region|load balancing|load balancer'),
    ('data_location', 'data residency|data sovereignty|data location|data localization|where data is stored|hosting region'),
    ('dlp', 'data loss prevention|DLP|data leakage|data exfiltration|exfiltration'),
    ('time_sync', 'NTP|time synchronization|clock synchronization|network time protocol'),
    ('threat_intelligence', 'threat intelligence|threat feed|threat feeds|threat hunting'),
    ('vulnerability_disclosure', 'bug bounty|responsible disclosure|vulnerability disclosure|coordinated disclosure'),
    ('confidentiality_agreement', 'NDA|non-disclosure agreement|confidentiality agreement|confidentiality agreements'),
    ('segregation_of_duties', 'segregation of duties|separation of duties'),
    ('wireless', 'wireless|Wi-Fi|WiFi|WPA2|WPA3'),
    ('email_security', 'SPF|DKIM|DMARC|email security|email filtering'),
    ('identity_lifecycle', 'provisioning|deprovisioning|de-provisioning|onboarding|offboarding|account termination|joiner mover leaver'),
    ('physical_access', 'physical access|badge|badges|CCTV|video surveillance|visitor log|visitor logs|biometric'),
    ('capacity', 'capacity planning|capacity management|scalability|resource planning'),
    ('insurance', 'cyber insurance|cyber liability|insurance coverage|liability insurance'),
    ('data_portability', 'data export|data portability|export data|return of data|data return')
  ) AS v(concept, phrases),
  unnest(string_to_array(v.phrases, '|')) AS p(phrase);
