# scripts/fleet_tls.rb: the cluster CA and the nodes' certificates of a
# Vagrant fleet, made on the machine that runs vagrant (the CA key never
# enters a VM). The Vagrantfile requires this file; `ruby -r ./scripts/fleet_tls.rb
# -e 'RodonTLS.fleet(DIR, {"n1" => "10.0.0.1"}, ["n1"])'` runs it alone.
#
# It writes what `scheduler tls init` and `scheduler tls issue` write (see
# internal/pki), with Ruby's OpenSSL: ECDSA P-256 keys in PKCS#8, X.509 v3
# certificates whose one URI SAN is the identity spiffe://rodon/ROLE/NAME.
#   DIR/ca.crt, DIR/ca.key               the cluster CA
#   DIR/NODE/ca.crt                      copied to each node's /etc/rodon/tls
#   DIR/NODE/{member,agent,operator}-NODE.{crt,key}, and gateway-NODE on
#   gateway nodes
# Pairs are kept while valid for more than RENEW_DAYS; re-running renews the
# others (daemons pick new files up without a restart).
require "openssl"
require "fileutils"

module RodonTLS
  CA_DAYS = 3650
  LEAF_DAYS = 30
  RENEW_DAYS = 10
  DAY = 86_400

  # ca returns the CA key and certificate in dir, made if missing.
  def self.ca(dir)
    key_path = File.join(dir, "ca.key")
    crt_path = File.join(dir, "ca.crt")
    if File.exist?(key_path) && File.exist?(crt_path)
      return [OpenSSL::PKey.read(File.read(key_path)), OpenSSL::X509::Certificate.new(File.read(crt_path))]
    end
    FileUtils.mkdir_p(dir)
    key = OpenSSL::PKey::EC.generate("prime256v1")
    cert = OpenSSL::X509::Certificate.new
    cert.version = 2
    cert.serial = OpenSSL::BN.rand(127)
    cert.subject = cert.issuer = OpenSSL::X509::Name.new([["O", "Rodon"], ["CN", "Rodon cluster CA"]])
    cert.public_key = key
    cert.not_before = Time.now - 60
    cert.not_after = Time.now + CA_DAYS * DAY
    ef = OpenSSL::X509::ExtensionFactory.new(cert, cert)
    cert.add_extension(ef.create_extension("basicConstraints", "CA:TRUE,pathlen:0", true))
    cert.add_extension(ef.create_extension("keyUsage", "keyCertSign,cRLSign", true))
    cert.add_extension(ef.create_extension("subjectKeyIdentifier", "hash"))
    cert.sign(key, OpenSSL::Digest.new("SHA256"))
    File.write(key_path, key.private_to_pem, perm: 0o600)
    File.write(crt_path, cert.to_pem)
    [key, cert]
  end

  # issue writes dir/ROLE-NAME.{crt,key} unless a pair valid under the CA
  # for more than RENEW_DAYS is there.
  def self.issue(dir, ca_key, ca_cert, role, name, hosts = [])
    base = File.join(dir, "#{role}-#{name}")
    if File.exist?("#{base}.crt") && File.exist?("#{base}.key")
      old = OpenSSL::X509::Certificate.new(File.read("#{base}.crt"))
      return if old.verify(ca_cert.public_key) && old.not_after > Time.now + RENEW_DAYS * DAY
    end
    key = OpenSSL::PKey::EC.generate("prime256v1")
    cert = OpenSSL::X509::Certificate.new
    cert.version = 2
    cert.serial = OpenSSL::BN.rand(127)
    cert.subject = OpenSSL::X509::Name.new([["O", "Rodon"], ["CN", "#{role}/#{name}"]])
    cert.issuer = ca_cert.subject
    cert.public_key = key
    cert.not_before = Time.now - 60
    cert.not_after = [Time.now + LEAF_DAYS * DAY, ca_cert.not_after].min
    ef = OpenSSL::X509::ExtensionFactory.new(ca_cert, cert)
    cert.add_extension(ef.create_extension("basicConstraints", "CA:FALSE", true))
    cert.add_extension(ef.create_extension("keyUsage", "digitalSignature", true))
    cert.add_extension(ef.create_extension("extendedKeyUsage", "serverAuth,clientAuth"))
    sans = ["URI:spiffe://rodon/#{role}/#{name}"] +
           hosts.map { |h| h.match?(/\A[0-9a-fA-F.:]+\z/) ? "IP:#{h}" : "DNS:#{h}" }
    cert.add_extension(ef.create_extension("subjectAltName", sans.join(",")))
    cert.sign(ca_key, OpenSSL::Digest.new("SHA256"))
    File.write("#{base}.key", key.private_to_pem, perm: 0o600)
    File.write("#{base}.crt", cert.to_pem)
  end

  # fleet makes the CA in dir and every node's directory; nodes maps a
  # node name to its address, gateways lists the nodes that run a gateway.
  def self.fleet(dir, nodes, gateways)
    ca_key, ca_cert = ca(dir)
    nodes.each do |name, ip|
      nd = File.join(dir, name)
      FileUtils.mkdir_p(nd)
      File.write(File.join(nd, "ca.crt"), ca_cert.to_pem)
      issue(nd, ca_key, ca_cert, "member", name, [ip])
      issue(nd, ca_key, ca_cert, "agent", name, [ip])
      issue(nd, ca_key, ca_cert, "operator", name)
      issue(nd, ca_key, ca_cert, "gateway", name, [ip, name]) if gateways.include?(name)
    end
  end
end
