-- The seeded vocabulary becomes data: sql/vocabulary.toml, which `migrate` syncs after the
-- migrations (service/db.py), instead of one migration per change (0003, 0015, 0017, 0018).
--
-- `seeded` tells the file's rows from operators' own, which the sync never touches. Operators'
-- rows are those of an account, and those for every account (account_id NULL) that the four
-- migrations did not seed; the rows below are the four migrations' net, as they left it. (An
-- operator's row for every account holding one of these phrases, which 0017 and 0018 kept in
-- place of their own, cannot be told from a seeded one and is marked seeded with them.)
ALTER TABLE knowledge_vocabulary ADD COLUMN seeded boolean NOT NULL DEFAULT false
    CHECK (NOT seeded OR account_id IS NULL);

UPDATE knowledge_vocabulary k
   SET seeded = true
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
    ('monitoring', 'monitoring|monitor|alerting|alerts|24x7|security operations center'),
    ('hipaa', 'HIPAA|PHI|protected health information|health information|BAA|business associate'),
    ('pci', 'PCI|PCI DSS|cardholder data|payment card'),
    ('accessibility', 'VPAT|WCAG|section 508|ADA'),
    ('fips', 'FIPS|FIPS 140-2|FIPS 140-3|approved cryptographic|validated cryptographic module'),
    ('governance', 'governance|information security office|information security staff|security staff|security program|CISO|chief information security officer|security officer|security team|oversight'),
    ('remote_access', 'remote access|VPN|virtual private network|remote connection'),
    ('session', 'session timeout|session management|idle timeout|inactivity timeout|automatic logoff'),
    ('tenant_isolation', 'multi-tenant|multitenant|tenant isolation|segregation|logical separation|data segregation'),
    ('asset_inventory', 'asset inventory|asset management|hardware inventory|software inventory|CMDB'),
    ('sla', 'SLA|service level agreement|uptime|availability|service availability'),
    ('secure_configuration', 'hardening|hardened|system hardening|baseline configuration|configuration baseline|secure configuration|CIS benchmark|CIS benchmarks|golden image'),
    ('high_availability', 'high availability|redundancy|redundant|geo-redundant|geographic redundancy|availability zone|availability zones|multi-region|load balancing|load balancer|geographically diverse|geographically separate|geographically dispersed|geographically distinct'),
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
    ('data_portability', 'data export|data portability|export data|return of data|data return'),
    ('annual', 'annually|every year|last year|past year|per year|every 12 months|last 12 months|past 12 months|every twelve months|last twelve months|past twelve months')
  ) AS v(concept, phrases),
  unnest(string_to_array(v.phrases, '|')) AS p(phrase)
 WHERE k.account_id IS NULL AND k.concept = v.concept AND lower(k.phrase) = lower(p.phrase);
